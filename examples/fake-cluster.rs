//! Runs a fake Kubernetes API server with GPU nodes until Ctrl-C, to register a cluster by hand:
//!
//! ```text
//! cargo run --example fake-cluster -- --nodes 4 --gpus-per-node 8 --kubeconfig-out /tmp/gpu-a.kubeconfig
//! kubectl --kubeconfig /tmp/gpu-a.kubeconfig get nodes
//! ```

use std::net::IpAddr;
use std::path::PathBuf;

use clap::Parser;
use gshare_fake_kube::{Auth, ClusterSpec, FakeCluster};

#[derive(Parser, Debug)]
#[command(about = "A fake Kubernetes API server with GPU nodes, for trying gShare Edge by hand")]
struct Args {
    /// Number of GPU nodes.
    #[arg(long, default_value_t = 2)]
    nodes: usize,
    /// GPUs on each node.
    #[arg(long, default_value_t = 4)]
    gpus_per_node: usize,
    /// Memory of one GPU, MiB.
    #[arg(long, default_value_t = 81_920)]
    gpu_mem_mb: u64,
    /// GPU model name.
    #[arg(long, default_value = "NVIDIA A100-SXM4-80GB")]
    gpu_model: String,
    /// Address to listen on (127.0.0.2 plays a remote cluster); the port is picked by the OS.
    #[arg(long, default_value = "127.0.0.1")]
    bind: IpAddr,
    /// Serve plain HTTP instead of HTTPS.
    #[arg(long)]
    plain_http: bool,
    /// Authenticate with a client certificate instead of a bearer token.
    #[arg(long)]
    client_cert: bool,
    /// Nodes without HAMi's annotations.
    #[arg(long)]
    no_hami: bool,
    /// No RuntimeClass `nvidia`.
    #[arg(long)]
    no_runtime_class: bool,
    /// The uid of namespace kube-system (the cluster's identity); random by default.
    #[arg(long)]
    kube_system_uid: Option<String>,
    /// Node name prefix.
    #[arg(long, default_value = "gpu-node-")]
    node_prefix: String,
    /// Cluster and context name in the kubeconfig.
    #[arg(long, default_value = "fake")]
    name: String,
    /// Write the kubeconfig here (else it is printed).
    #[arg(long)]
    kubeconfig_out: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let spec = ClusterSpec {
        nodes: args.nodes,
        gpus_per_node: args.gpus_per_node,
        gpu_mem_mb: args.gpu_mem_mb,
        gpu_model: args.gpu_model,
        hami: !args.no_hami,
        runtime_class_nvidia: !args.no_runtime_class,
        auth: if args.client_cert { Auth::ClientCert } else { Auth::Token },
        tls: !args.plain_http,
        bind: args.bind,
        kube_system_uid: args.kube_system_uid,
        node_prefix: args.node_prefix,
        name: args.name,
    };
    let cluster = FakeCluster::start(spec).await?;
    let kubeconfig = cluster.kubeconfig_yaml();
    println!("fake cluster listening on {}", cluster.server_url());
    println!("kube-system uid: {}", cluster.kube_system_uid());
    println!("nodes: {}", cluster.node_names().join(", "));
    match &args.kubeconfig_out {
        Some(path) => {
            write_private(path, &kubeconfig)?;
            println!("kubeconfig written to {}", path.display());
            println!("try: kubectl --kubeconfig {} get nodes", path.display());
        }
        None => println!("--- kubeconfig ---\n{kubeconfig}"),
    }
    println!("Ctrl-C stops it");
    tokio::signal::ctrl_c().await?;
    cluster.shutdown().await;
    Ok(())
}

/// The kubeconfig holds a credential: readable by its owner only.
fn write_private(path: &std::path::Path, content: &str) -> std::io::Result<()> {
    use std::io::Write;
    #[cfg(unix)]
    use std::os::unix::fs::OpenOptionsExt;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    opts.mode(0o600);
    let mut f = opts.open(path)?;
    f.write_all(content.as_bytes())
}
