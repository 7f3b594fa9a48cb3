# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_gshare_global_optspecs
    string join \n config= h/help V/version
end

function __fish_gshare_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_gshare_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_gshare_using_subcommand
    set -l cmd (__fish_gshare_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c gshare -n "__fish_gshare_needs_command" -l config -d 'TOML configuration file (default: $GSHARE_CONFIG, else /etc/gshare/config.toml if it exists)' -r -F
complete -c gshare -n "__fish_gshare_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c gshare -n "__fish_gshare_needs_command" -s V -l version -d 'Print version'
complete -c gshare -n "__fish_gshare_needs_command" -f -a "serve" -d 'Run the control plane: the API, operator callbacks and the console on one port'
complete -c gshare -n "__fish_gshare_needs_command" -f -a "token" -d 'Operator tokens: minted by the running server (audited), else from the signing keys in the data directory'
complete -c gshare -n "__fish_gshare_needs_command" -f -a "admin" -d 'Administrator access to the API'
complete -c gshare -n "__fish_gshare_needs_command" -f -a "keys" -d 'Manage the internal JWT signing keys (the ones operators\' tokens are checked against)'
complete -c gshare -n "__fish_gshare_needs_command" -f -a "config" -d 'Validate the configuration and print it, secrets redacted'
complete -c gshare -n "__fish_gshare_needs_command" -f -a "audit" -d 'The audit log: logins and admin changes'
complete -c gshare -n "__fish_gshare_needs_command" -f -a "snapshot" -d 'Snapshots of the state file: save (also while the server runs), list, prune, restore'
complete -c gshare -n "__fish_gshare_needs_command" -f -a "export" -d 'Write clusters, nodes, GPUs, offerings, sessions and audit as JSON lines (`{"kind": ..., "record": ...}` per line; see the README\'s "Export" section)'
complete -c gshare -n "__fish_gshare_needs_command" -f -a "operator" -d 'The gShare operator\'s Kubernetes objects'
complete -c gshare -n "__fish_gshare_needs_command" -f -a "cluster" -d 'Registered clusters, through the running server (its admin socket)'
complete -c gshare -n "__fish_gshare_needs_command" -f -a "completions" -d 'Print a completion script for a shell. The packages install them (bash-completion, zsh, fish); by hand: `gshare completions bash > ~/.local/share/bash-completion/completions/gshare`'
complete -c gshare -n "__fish_gshare_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c gshare -n "__fish_gshare_using_subcommand serve" -l config -d 'TOML configuration file (default: $GSHARE_CONFIG, else /etc/gshare/config.toml if it exists)' -r -F
complete -c gshare -n "__fish_gshare_using_subcommand serve" -s h -l help -d 'Print help'
complete -c gshare -n "__fish_gshare_using_subcommand token; and not __fish_seen_subcommand_from operator help" -l config -d 'TOML configuration file (default: $GSHARE_CONFIG, else /etc/gshare/config.toml if it exists)' -r -F
complete -c gshare -n "__fish_gshare_using_subcommand token; and not __fish_seen_subcommand_from operator help" -s h -l help -d 'Print help'
complete -c gshare -n "__fish_gshare_using_subcommand token; and not __fish_seen_subcommand_from operator help" -f -a "operator" -d 'Print an operator token for one cluster (the Secret `gshare-operator-internal-jwt`, key `internal-jwt`)'
complete -c gshare -n "__fish_gshare_using_subcommand token; and not __fish_seen_subcommand_from operator help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c gshare -n "__fish_gshare_using_subcommand token; and __fish_seen_subcommand_from operator" -l cluster-id -d 'The cluster\'s id, as returned by registration (clu_<ULID> or clu_local)' -r
complete -c gshare -n "__fish_gshare_using_subcommand token; and __fish_seen_subcommand_from operator" -l ttl -d 'How long the token stays valid: e.g. 24h, 7d (at most 30d)' -r
complete -c gshare -n "__fish_gshare_using_subcommand token; and __fish_seen_subcommand_from operator" -l config -d 'TOML configuration file (default: $GSHARE_CONFIG, else /etc/gshare/config.toml if it exists)' -r -F
complete -c gshare -n "__fish_gshare_using_subcommand token; and __fish_seen_subcommand_from operator" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c gshare -n "__fish_gshare_using_subcommand token; and __fish_seen_subcommand_from help" -f -a "operator" -d 'Print an operator token for one cluster (the Secret `gshare-operator-internal-jwt`, key `internal-jwt`)'
complete -c gshare -n "__fish_gshare_using_subcommand token; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c gshare -n "__fish_gshare_using_subcommand admin; and not __fish_seen_subcommand_from token set-password add list remove help" -l config -d 'TOML configuration file (default: $GSHARE_CONFIG, else /etc/gshare/config.toml if it exists)' -r -F
complete -c gshare -n "__fish_gshare_using_subcommand admin; and not __fish_seen_subcommand_from token set-password add list remove help" -s h -l help -d 'Print help'
complete -c gshare -n "__fish_gshare_using_subcommand admin; and not __fish_seen_subcommand_from token set-password add list remove help" -f -a "token" -d 'Print an admin API token (last line of stdout) for `Authorization: Bearer` on /api/v1'
complete -c gshare -n "__fish_gshare_using_subcommand admin; and not __fish_seen_subcommand_from token set-password add list remove help" -f -a "set-password" -d 'Set an account\'s password: typed twice on a terminal, else the first line of stdin'
complete -c gshare -n "__fish_gshare_using_subcommand admin; and not __fish_seen_subcommand_from token set-password add list remove help" -f -a "add" -d 'Add an admin account; its password is read like `set-password`'
complete -c gshare -n "__fish_gshare_using_subcommand admin; and not __fish_seen_subcommand_from token set-password add list remove help" -f -a "list" -d 'List the admin accounts'
complete -c gshare -n "__fish_gshare_using_subcommand admin; and not __fish_seen_subcommand_from token set-password add list remove help" -f -a "remove" -d 'Remove an admin account; the last one can\'t be removed'
complete -c gshare -n "__fish_gshare_using_subcommand admin; and not __fish_seen_subcommand_from token set-password add list remove help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c gshare -n "__fish_gshare_using_subcommand admin; and __fish_seen_subcommand_from token" -l ttl -d 'How long the token stays valid: e.g. 15m, 1h, 8h (at most 30d)' -r
complete -c gshare -n "__fish_gshare_using_subcommand admin; and __fish_seen_subcommand_from token" -l name -d 'The account the token acts as (recorded in the audit log)' -r
complete -c gshare -n "__fish_gshare_using_subcommand admin; and __fish_seen_subcommand_from token" -l config -d 'TOML configuration file (default: $GSHARE_CONFIG, else /etc/gshare/config.toml if it exists)' -r -F
complete -c gshare -n "__fish_gshare_using_subcommand admin; and __fish_seen_subcommand_from token" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c gshare -n "__fish_gshare_using_subcommand admin; and __fish_seen_subcommand_from set-password" -l config -d 'TOML configuration file (default: $GSHARE_CONFIG, else /etc/gshare/config.toml if it exists)' -r -F
complete -c gshare -n "__fish_gshare_using_subcommand admin; and __fish_seen_subcommand_from set-password" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c gshare -n "__fish_gshare_using_subcommand admin; and __fish_seen_subcommand_from add" -l config -d 'TOML configuration file (default: $GSHARE_CONFIG, else /etc/gshare/config.toml if it exists)' -r -F
complete -c gshare -n "__fish_gshare_using_subcommand admin; and __fish_seen_subcommand_from add" -s h -l help -d 'Print help'
complete -c gshare -n "__fish_gshare_using_subcommand admin; and __fish_seen_subcommand_from list" -l config -d 'TOML configuration file (default: $GSHARE_CONFIG, else /etc/gshare/config.toml if it exists)' -r -F
complete -c gshare -n "__fish_gshare_using_subcommand admin; and __fish_seen_subcommand_from list" -s h -l help -d 'Print help'
complete -c gshare -n "__fish_gshare_using_subcommand admin; and __fish_seen_subcommand_from remove" -l config -d 'TOML configuration file (default: $GSHARE_CONFIG, else /etc/gshare/config.toml if it exists)' -r -F
complete -c gshare -n "__fish_gshare_using_subcommand admin; and __fish_seen_subcommand_from remove" -s h -l help -d 'Print help'
complete -c gshare -n "__fish_gshare_using_subcommand admin; and __fish_seen_subcommand_from help" -f -a "token" -d 'Print an admin API token (last line of stdout) for `Authorization: Bearer` on /api/v1'
complete -c gshare -n "__fish_gshare_using_subcommand admin; and __fish_seen_subcommand_from help" -f -a "set-password" -d 'Set an account\'s password: typed twice on a terminal, else the first line of stdin'
complete -c gshare -n "__fish_gshare_using_subcommand admin; and __fish_seen_subcommand_from help" -f -a "add" -d 'Add an admin account; its password is read like `set-password`'
complete -c gshare -n "__fish_gshare_using_subcommand admin; and __fish_seen_subcommand_from help" -f -a "list" -d 'List the admin accounts'
complete -c gshare -n "__fish_gshare_using_subcommand admin; and __fish_seen_subcommand_from help" -f -a "remove" -d 'Remove an admin account; the last one can\'t be removed'
complete -c gshare -n "__fish_gshare_using_subcommand admin; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c gshare -n "__fish_gshare_using_subcommand keys; and not __fish_seen_subcommand_from list rotate prune help" -l config -d 'TOML configuration file (default: $GSHARE_CONFIG, else /etc/gshare/config.toml if it exists)' -r -F
complete -c gshare -n "__fish_gshare_using_subcommand keys; and not __fish_seen_subcommand_from list rotate prune help" -s h -l help -d 'Print help'
complete -c gshare -n "__fish_gshare_using_subcommand keys; and not __fish_seen_subcommand_from list rotate prune help" -f -a "list" -d 'List the signing keys: kid, created, state'
complete -c gshare -n "__fish_gshare_using_subcommand keys; and not __fish_seen_subcommand_from list rotate prune help" -f -a "rotate" -d 'Make a new signing key; tokens signed by older keys keep verifying until pruned'
complete -c gshare -n "__fish_gshare_using_subcommand keys; and not __fish_seen_subcommand_from list rotate prune help" -f -a "prune" -d 'Drop keys retired for longer than the longest token lifetime (30 days). Refuses, naming the clusters, while an attached cluster\'s current operator token was signed by a key it would drop and has not expired'
complete -c gshare -n "__fish_gshare_using_subcommand keys; and not __fish_seen_subcommand_from list rotate prune help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c gshare -n "__fish_gshare_using_subcommand keys; and __fish_seen_subcommand_from list" -l config -d 'TOML configuration file (default: $GSHARE_CONFIG, else /etc/gshare/config.toml if it exists)' -r -F
complete -c gshare -n "__fish_gshare_using_subcommand keys; and __fish_seen_subcommand_from list" -s h -l help -d 'Print help'
complete -c gshare -n "__fish_gshare_using_subcommand keys; and __fish_seen_subcommand_from rotate" -l config -d 'TOML configuration file (default: $GSHARE_CONFIG, else /etc/gshare/config.toml if it exists)' -r -F
complete -c gshare -n "__fish_gshare_using_subcommand keys; and __fish_seen_subcommand_from rotate" -s h -l help -d 'Print help'
complete -c gshare -n "__fish_gshare_using_subcommand keys; and __fish_seen_subcommand_from prune" -l older-than -d 'Drop keys retired longer ago than this (e.g. `2h`, `0s`). Operator tokens minted by hand (`gshare token operator`) are not recorded: below 30 days they may stop verifying' -r
complete -c gshare -n "__fish_gshare_using_subcommand keys; and __fish_seen_subcommand_from prune" -l config -d 'TOML configuration file (default: $GSHARE_CONFIG, else /etc/gshare/config.toml if it exists)' -r -F
complete -c gshare -n "__fish_gshare_using_subcommand keys; and __fish_seen_subcommand_from prune" -l force -d 'Prune even when an attached cluster\'s live operator token needs the key (its operator is refused until the token is renewed)'
complete -c gshare -n "__fish_gshare_using_subcommand keys; and __fish_seen_subcommand_from prune" -s h -l help -d 'Print help'
complete -c gshare -n "__fish_gshare_using_subcommand keys; and __fish_seen_subcommand_from help" -f -a "list" -d 'List the signing keys: kid, created, state'
complete -c gshare -n "__fish_gshare_using_subcommand keys; and __fish_seen_subcommand_from help" -f -a "rotate" -d 'Make a new signing key; tokens signed by older keys keep verifying until pruned'
complete -c gshare -n "__fish_gshare_using_subcommand keys; and __fish_seen_subcommand_from help" -f -a "prune" -d 'Drop keys retired for longer than the longest token lifetime (30 days). Refuses, naming the clusters, while an attached cluster\'s current operator token was signed by a key it would drop and has not expired'
complete -c gshare -n "__fish_gshare_using_subcommand keys; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c gshare -n "__fish_gshare_using_subcommand config; and not __fish_seen_subcommand_from check help" -l config -d 'TOML configuration file (default: $GSHARE_CONFIG, else /etc/gshare/config.toml if it exists)' -r -F
complete -c gshare -n "__fish_gshare_using_subcommand config; and not __fish_seen_subcommand_from check help" -s h -l help -d 'Print help'
complete -c gshare -n "__fish_gshare_using_subcommand config; and not __fish_seen_subcommand_from check help" -f -a "check" -d 'Check the effective configuration; exits non-zero naming the offending key'
complete -c gshare -n "__fish_gshare_using_subcommand config; and not __fish_seen_subcommand_from check help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c gshare -n "__fish_gshare_using_subcommand config; and __fish_seen_subcommand_from check" -l ldap-test -d 'Also sign USER in against the configured `[ldap]` directory (password typed, or the first line of stdin) and print each step: connect, bind, search, groups, role and group. Writes nothing' -r
complete -c gshare -n "__fish_gshare_using_subcommand config; and __fish_seen_subcommand_from check" -l config -d 'TOML configuration file (default: $GSHARE_CONFIG, else /etc/gshare/config.toml if it exists)' -r -F
complete -c gshare -n "__fish_gshare_using_subcommand config; and __fish_seen_subcommand_from check" -s h -l help -d 'Print help'
complete -c gshare -n "__fish_gshare_using_subcommand config; and __fish_seen_subcommand_from help" -f -a "check" -d 'Check the effective configuration; exits non-zero naming the offending key'
complete -c gshare -n "__fish_gshare_using_subcommand config; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c gshare -n "__fish_gshare_using_subcommand audit; and not __fish_seen_subcommand_from tail help" -l config -d 'TOML configuration file (default: $GSHARE_CONFIG, else /etc/gshare/config.toml if it exists)' -r -F
complete -c gshare -n "__fish_gshare_using_subcommand audit; and not __fish_seen_subcommand_from tail help" -s h -l help -d 'Print help'
complete -c gshare -n "__fish_gshare_using_subcommand audit; and not __fish_seen_subcommand_from tail help" -f -a "tail" -d 'Print the newest audit entries, oldest first'
complete -c gshare -n "__fish_gshare_using_subcommand audit; and not __fish_seen_subcommand_from tail help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c gshare -n "__fish_gshare_using_subcommand audit; and __fish_seen_subcommand_from tail" -s n -l lines -d 'How many entries' -r
complete -c gshare -n "__fish_gshare_using_subcommand audit; and __fish_seen_subcommand_from tail" -l config -d 'TOML configuration file (default: $GSHARE_CONFIG, else /etc/gshare/config.toml if it exists)' -r -F
complete -c gshare -n "__fish_gshare_using_subcommand audit; and __fish_seen_subcommand_from tail" -s h -l help -d 'Print help'
complete -c gshare -n "__fish_gshare_using_subcommand audit; and __fish_seen_subcommand_from help" -f -a "tail" -d 'Print the newest audit entries, oldest first'
complete -c gshare -n "__fish_gshare_using_subcommand audit; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c gshare -n "__fish_gshare_using_subcommand snapshot; and not __fish_seen_subcommand_from save ls prune restore help" -l config -d 'TOML configuration file (default: $GSHARE_CONFIG, else /etc/gshare/config.toml if it exists)' -r -F
complete -c gshare -n "__fish_gshare_using_subcommand snapshot; and not __fish_seen_subcommand_from save ls prune restore help" -s h -l help -d 'Print help'
complete -c gshare -n "__fish_gshare_using_subcommand snapshot; and not __fish_seen_subcommand_from save ls prune restore help" -f -a "save" -d 'Take a snapshot now: into FILE, else into snapshot_dir. Works while the server runs (through its admin socket, <data_dir>/gshare.sock)'
complete -c gshare -n "__fish_gshare_using_subcommand snapshot; and not __fish_seen_subcommand_from save ls prune restore help" -f -a "ls" -d 'List the snapshots in snapshot_dir, oldest first'
complete -c gshare -n "__fish_gshare_using_subcommand snapshot; and not __fish_seen_subcommand_from save ls prune restore help" -f -a "prune" -d 'Delete all but the newest N snapshots in snapshot_dir (pre-upgrade ones stay)'
complete -c gshare -n "__fish_gshare_using_subcommand snapshot; and not __fish_seen_subcommand_from save ls prune restore help" -f -a "restore" -d 'Replace the state with a snapshot (server stopped). The current state file is kept beside it as gshare.redb.before-restore-<time>'
complete -c gshare -n "__fish_gshare_using_subcommand snapshot; and not __fish_seen_subcommand_from save ls prune restore help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c gshare -n "__fish_gshare_using_subcommand snapshot; and __fish_seen_subcommand_from save" -l reason -d 'A short word in the header and file name' -r
complete -c gshare -n "__fish_gshare_using_subcommand snapshot; and __fish_seen_subcommand_from save" -l passphrase-file -d 'The passphrase\'s file (first line); else $GSHARE_SNAPSHOT_PASSPHRASE, else a prompt' -r -F
complete -c gshare -n "__fish_gshare_using_subcommand snapshot; and __fish_seen_subcommand_from save" -l config -d 'TOML configuration file (default: $GSHARE_CONFIG, else /etc/gshare/config.toml if it exists)' -r -F
complete -c gshare -n "__fish_gshare_using_subcommand snapshot; and __fish_seen_subcommand_from save" -l include-secrets -d 'Add the key rings and kubeconfigs, encrypted with a passphrase (age, scrypt)'
complete -c gshare -n "__fish_gshare_using_subcommand snapshot; and __fish_seen_subcommand_from save" -l pre-upgrade -d 'Only if another gshare version last ran on this data directory (the unit\'s ExecStartPre): reason `pre-upgrade`, never pruned. Does nothing otherwise'
complete -c gshare -n "__fish_gshare_using_subcommand snapshot; and __fish_seen_subcommand_from save" -s h -l help -d 'Print help'
complete -c gshare -n "__fish_gshare_using_subcommand snapshot; and __fish_seen_subcommand_from ls" -l config -d 'TOML configuration file (default: $GSHARE_CONFIG, else /etc/gshare/config.toml if it exists)' -r -F
complete -c gshare -n "__fish_gshare_using_subcommand snapshot; and __fish_seen_subcommand_from ls" -s h -l help -d 'Print help'
complete -c gshare -n "__fish_gshare_using_subcommand snapshot; and __fish_seen_subcommand_from prune" -l keep -r
complete -c gshare -n "__fish_gshare_using_subcommand snapshot; and __fish_seen_subcommand_from prune" -l config -d 'TOML configuration file (default: $GSHARE_CONFIG, else /etc/gshare/config.toml if it exists)' -r -F
complete -c gshare -n "__fish_gshare_using_subcommand snapshot; and __fish_seen_subcommand_from prune" -s h -l help -d 'Print help'
complete -c gshare -n "__fish_gshare_using_subcommand snapshot; and __fish_seen_subcommand_from restore" -l passphrase-file -d 'For snapshots with secrets: the passphrase\'s file; else $GSHARE_SNAPSHOT_PASSPHRASE, else a prompt' -r -F
complete -c gshare -n "__fish_gshare_using_subcommand snapshot; and __fish_seen_subcommand_from restore" -l config -d 'TOML configuration file (default: $GSHARE_CONFIG, else /etc/gshare/config.toml if it exists)' -r -F
complete -c gshare -n "__fish_gshare_using_subcommand snapshot; and __fish_seen_subcommand_from restore" -l skip-secrets -d 'Restore the state only, even if the snapshot holds secrets'
complete -c gshare -n "__fish_gshare_using_subcommand snapshot; and __fish_seen_subcommand_from restore" -s h -l help -d 'Print help'
complete -c gshare -n "__fish_gshare_using_subcommand snapshot; and __fish_seen_subcommand_from help" -f -a "save" -d 'Take a snapshot now: into FILE, else into snapshot_dir. Works while the server runs (through its admin socket, <data_dir>/gshare.sock)'
complete -c gshare -n "__fish_gshare_using_subcommand snapshot; and __fish_seen_subcommand_from help" -f -a "ls" -d 'List the snapshots in snapshot_dir, oldest first'
complete -c gshare -n "__fish_gshare_using_subcommand snapshot; and __fish_seen_subcommand_from help" -f -a "prune" -d 'Delete all but the newest N snapshots in snapshot_dir (pre-upgrade ones stay)'
complete -c gshare -n "__fish_gshare_using_subcommand snapshot; and __fish_seen_subcommand_from help" -f -a "restore" -d 'Replace the state with a snapshot (server stopped). The current state file is kept beside it as gshare.redb.before-restore-<time>'
complete -c gshare -n "__fish_gshare_using_subcommand snapshot; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c gshare -n "__fish_gshare_using_subcommand export" -l from -d 'Read a snapshot file instead of the live state' -r -F
complete -c gshare -n "__fish_gshare_using_subcommand export" -s o -l output -d 'Write here instead of stdout' -r -F
complete -c gshare -n "__fish_gshare_using_subcommand export" -l config -d 'TOML configuration file (default: $GSHARE_CONFIG, else /etc/gshare/config.toml if it exists)' -r -F
complete -c gshare -n "__fish_gshare_using_subcommand export" -s h -l help -d 'Print help'
complete -c gshare -n "__fish_gshare_using_subcommand operator; and not __fish_seen_subcommand_from manifests help" -l config -d 'TOML configuration file (default: $GSHARE_CONFIG, else /etc/gshare/config.toml if it exists)' -r -F
complete -c gshare -n "__fish_gshare_using_subcommand operator; and not __fish_seen_subcommand_from manifests help" -s h -l help -d 'Print help'
complete -c gshare -n "__fish_gshare_using_subcommand operator; and not __fish_seen_subcommand_from manifests help" -f -a "manifests" -d 'Print every object the operator needs on a cluster (upstream\'s chart): 3 CRDs, namespaces, RBAC, the token Secret and the Deployment. The token is OPERATOR_TOKEN if set, else minted by the running server (audited); `--no-token` leaves the Secret out'
complete -c gshare -n "__fish_gshare_using_subcommand operator; and not __fish_seen_subcommand_from manifests help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c gshare -n "__fish_gshare_using_subcommand operator; and __fish_seen_subcommand_from manifests" -l cluster-id -r
complete -c gshare -n "__fish_gshare_using_subcommand operator; and __fish_seen_subcommand_from manifests" -l image -d 'Operator image (default: operator_image)' -r
complete -c gshare -n "__fish_gshare_using_subcommand operator; and __fish_seen_subcommand_from manifests" -l control-plane-url -d 'URL the operator calls back and ingress forward-auth uses (default: public_url)' -r
complete -c gshare -n "__fish_gshare_using_subcommand operator; and __fish_seen_subcommand_from manifests" -l session-domain -d 'Session domain; must equal this server\'s (default: session_domain)' -r
complete -c gshare -n "__fish_gshare_using_subcommand operator; and __fish_seen_subcommand_from manifests" -l token -d 'The operator token for Secret gshare-operator-internal-jwt (default: minted by the running server)' -r
complete -c gshare -n "__fish_gshare_using_subcommand operator; and __fish_seen_subcommand_from manifests" -l config -d 'TOML configuration file (default: $GSHARE_CONFIG, else /etc/gshare/config.toml if it exists)' -r -F
complete -c gshare -n "__fish_gshare_using_subcommand operator; and __fish_seen_subcommand_from manifests" -l no-token -d 'Leave the token Secret out (apply it later, e.g. from `gshare token operator`)'
complete -c gshare -n "__fish_gshare_using_subcommand operator; and __fish_seen_subcommand_from manifests" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c gshare -n "__fish_gshare_using_subcommand operator; and __fish_seen_subcommand_from help" -f -a "manifests" -d 'Print every object the operator needs on a cluster (upstream\'s chart): 3 CRDs, namespaces, RBAC, the token Secret and the Deployment. The token is OPERATOR_TOKEN if set, else minted by the running server (audited); `--no-token` leaves the Secret out'
complete -c gshare -n "__fish_gshare_using_subcommand operator; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c gshare -n "__fish_gshare_using_subcommand cluster; and not __fish_seen_subcommand_from attach detach help" -l config -d 'TOML configuration file (default: $GSHARE_CONFIG, else /etc/gshare/config.toml if it exists)' -r -F
complete -c gshare -n "__fish_gshare_using_subcommand cluster; and not __fish_seen_subcommand_from attach detach help" -s h -l help -d 'Print help'
complete -c gshare -n "__fish_gshare_using_subcommand cluster; and not __fish_seen_subcommand_from attach detach help" -f -a "attach" -d 'Attach the operator: apply its objects through the cluster\'s kubeconfig (the server must run)'
complete -c gshare -n "__fish_gshare_using_subcommand cluster; and not __fish_seen_subcommand_from attach detach help" -f -a "detach" -d 'Remove what attach made (refused while the cluster has live sessions): custom resources first, then the operator, its RBAC and namespaces, the CRDs last'
complete -c gshare -n "__fish_gshare_using_subcommand cluster; and not __fish_seen_subcommand_from attach detach help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c gshare -n "__fish_gshare_using_subcommand cluster; and __fish_seen_subcommand_from attach" -l config -d 'TOML configuration file (default: $GSHARE_CONFIG, else /etc/gshare/config.toml if it exists)' -r -F
complete -c gshare -n "__fish_gshare_using_subcommand cluster; and __fish_seen_subcommand_from attach" -l force -d 'Replace CRDs on the cluster that differ from the shipped ones'
complete -c gshare -n "__fish_gshare_using_subcommand cluster; and __fish_seen_subcommand_from attach" -l replace -d 'Delete an operator Deployment another tool installed (Helm, deploy-operator.sh) and create gShare\'s'
complete -c gshare -n "__fish_gshare_using_subcommand cluster; and __fish_seen_subcommand_from attach" -l label-nodes -d 'Apply upstream\'s node labels (GPU nodes: gpu=on, gshare.io/gpu=true, gshare.io/gpu-mode=fractional; CPU nodes: gshare.io/node-type=cpu) where missing'
complete -c gshare -n "__fish_gshare_using_subcommand cluster; and __fish_seen_subcommand_from attach" -s h -l help -d 'Print help'
complete -c gshare -n "__fish_gshare_using_subcommand cluster; and __fish_seen_subcommand_from detach" -l config -d 'TOML configuration file (default: $GSHARE_CONFIG, else /etc/gshare/config.toml if it exists)' -r -F
complete -c gshare -n "__fish_gshare_using_subcommand cluster; and __fish_seen_subcommand_from detach" -l force -d 'Remove the finalizers of custom resources an operator will not clear'
complete -c gshare -n "__fish_gshare_using_subcommand cluster; and __fish_seen_subcommand_from detach" -s h -l help -d 'Print help'
complete -c gshare -n "__fish_gshare_using_subcommand cluster; and __fish_seen_subcommand_from help" -f -a "attach" -d 'Attach the operator: apply its objects through the cluster\'s kubeconfig (the server must run)'
complete -c gshare -n "__fish_gshare_using_subcommand cluster; and __fish_seen_subcommand_from help" -f -a "detach" -d 'Remove what attach made (refused while the cluster has live sessions): custom resources first, then the operator, its RBAC and namespaces, the CRDs last'
complete -c gshare -n "__fish_gshare_using_subcommand cluster; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c gshare -n "__fish_gshare_using_subcommand completions" -l config -d 'TOML configuration file (default: $GSHARE_CONFIG, else /etc/gshare/config.toml if it exists)' -r -F
complete -c gshare -n "__fish_gshare_using_subcommand completions" -s h -l help -d 'Print help'
complete -c gshare -n "__fish_gshare_using_subcommand help; and not __fish_seen_subcommand_from serve token admin keys config audit snapshot export operator cluster completions help" -f -a "serve" -d 'Run the control plane: the API, operator callbacks and the console on one port'
complete -c gshare -n "__fish_gshare_using_subcommand help; and not __fish_seen_subcommand_from serve token admin keys config audit snapshot export operator cluster completions help" -f -a "token" -d 'Operator tokens: minted by the running server (audited), else from the signing keys in the data directory'
complete -c gshare -n "__fish_gshare_using_subcommand help; and not __fish_seen_subcommand_from serve token admin keys config audit snapshot export operator cluster completions help" -f -a "admin" -d 'Administrator access to the API'
complete -c gshare -n "__fish_gshare_using_subcommand help; and not __fish_seen_subcommand_from serve token admin keys config audit snapshot export operator cluster completions help" -f -a "keys" -d 'Manage the internal JWT signing keys (the ones operators\' tokens are checked against)'
complete -c gshare -n "__fish_gshare_using_subcommand help; and not __fish_seen_subcommand_from serve token admin keys config audit snapshot export operator cluster completions help" -f -a "config" -d 'Validate the configuration and print it, secrets redacted'
complete -c gshare -n "__fish_gshare_using_subcommand help; and not __fish_seen_subcommand_from serve token admin keys config audit snapshot export operator cluster completions help" -f -a "audit" -d 'The audit log: logins and admin changes'
complete -c gshare -n "__fish_gshare_using_subcommand help; and not __fish_seen_subcommand_from serve token admin keys config audit snapshot export operator cluster completions help" -f -a "snapshot" -d 'Snapshots of the state file: save (also while the server runs), list, prune, restore'
complete -c gshare -n "__fish_gshare_using_subcommand help; and not __fish_seen_subcommand_from serve token admin keys config audit snapshot export operator cluster completions help" -f -a "export" -d 'Write clusters, nodes, GPUs, offerings, sessions and audit as JSON lines (`{"kind": ..., "record": ...}` per line; see the README\'s "Export" section)'
complete -c gshare -n "__fish_gshare_using_subcommand help; and not __fish_seen_subcommand_from serve token admin keys config audit snapshot export operator cluster completions help" -f -a "operator" -d 'The gShare operator\'s Kubernetes objects'
complete -c gshare -n "__fish_gshare_using_subcommand help; and not __fish_seen_subcommand_from serve token admin keys config audit snapshot export operator cluster completions help" -f -a "cluster" -d 'Registered clusters, through the running server (its admin socket)'
complete -c gshare -n "__fish_gshare_using_subcommand help; and not __fish_seen_subcommand_from serve token admin keys config audit snapshot export operator cluster completions help" -f -a "completions" -d 'Print a completion script for a shell. The packages install them (bash-completion, zsh, fish); by hand: `gshare completions bash > ~/.local/share/bash-completion/completions/gshare`'
complete -c gshare -n "__fish_gshare_using_subcommand help; and not __fish_seen_subcommand_from serve token admin keys config audit snapshot export operator cluster completions help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c gshare -n "__fish_gshare_using_subcommand help; and __fish_seen_subcommand_from token" -f -a "operator" -d 'Print an operator token for one cluster (the Secret `gshare-operator-internal-jwt`, key `internal-jwt`)'
complete -c gshare -n "__fish_gshare_using_subcommand help; and __fish_seen_subcommand_from admin" -f -a "token" -d 'Print an admin API token (last line of stdout) for `Authorization: Bearer` on /api/v1'
complete -c gshare -n "__fish_gshare_using_subcommand help; and __fish_seen_subcommand_from admin" -f -a "set-password" -d 'Set an account\'s password: typed twice on a terminal, else the first line of stdin'
complete -c gshare -n "__fish_gshare_using_subcommand help; and __fish_seen_subcommand_from admin" -f -a "add" -d 'Add an admin account; its password is read like `set-password`'
complete -c gshare -n "__fish_gshare_using_subcommand help; and __fish_seen_subcommand_from admin" -f -a "list" -d 'List the admin accounts'
complete -c gshare -n "__fish_gshare_using_subcommand help; and __fish_seen_subcommand_from admin" -f -a "remove" -d 'Remove an admin account; the last one can\'t be removed'
complete -c gshare -n "__fish_gshare_using_subcommand help; and __fish_seen_subcommand_from keys" -f -a "list" -d 'List the signing keys: kid, created, state'
complete -c gshare -n "__fish_gshare_using_subcommand help; and __fish_seen_subcommand_from keys" -f -a "rotate" -d 'Make a new signing key; tokens signed by older keys keep verifying until pruned'
complete -c gshare -n "__fish_gshare_using_subcommand help; and __fish_seen_subcommand_from keys" -f -a "prune" -d 'Drop keys retired for longer than the longest token lifetime (30 days). Refuses, naming the clusters, while an attached cluster\'s current operator token was signed by a key it would drop and has not expired'
complete -c gshare -n "__fish_gshare_using_subcommand help; and __fish_seen_subcommand_from config" -f -a "check" -d 'Check the effective configuration; exits non-zero naming the offending key'
complete -c gshare -n "__fish_gshare_using_subcommand help; and __fish_seen_subcommand_from audit" -f -a "tail" -d 'Print the newest audit entries, oldest first'
complete -c gshare -n "__fish_gshare_using_subcommand help; and __fish_seen_subcommand_from snapshot" -f -a "save" -d 'Take a snapshot now: into FILE, else into snapshot_dir. Works while the server runs (through its admin socket, <data_dir>/gshare.sock)'
complete -c gshare -n "__fish_gshare_using_subcommand help; and __fish_seen_subcommand_from snapshot" -f -a "ls" -d 'List the snapshots in snapshot_dir, oldest first'
complete -c gshare -n "__fish_gshare_using_subcommand help; and __fish_seen_subcommand_from snapshot" -f -a "prune" -d 'Delete all but the newest N snapshots in snapshot_dir (pre-upgrade ones stay)'
complete -c gshare -n "__fish_gshare_using_subcommand help; and __fish_seen_subcommand_from snapshot" -f -a "restore" -d 'Replace the state with a snapshot (server stopped). The current state file is kept beside it as gshare.redb.before-restore-<time>'
complete -c gshare -n "__fish_gshare_using_subcommand help; and __fish_seen_subcommand_from operator" -f -a "manifests" -d 'Print every object the operator needs on a cluster (upstream\'s chart): 3 CRDs, namespaces, RBAC, the token Secret and the Deployment. The token is OPERATOR_TOKEN if set, else minted by the running server (audited); `--no-token` leaves the Secret out'
complete -c gshare -n "__fish_gshare_using_subcommand help; and __fish_seen_subcommand_from cluster" -f -a "attach" -d 'Attach the operator: apply its objects through the cluster\'s kubeconfig (the server must run)'
complete -c gshare -n "__fish_gshare_using_subcommand help; and __fish_seen_subcommand_from cluster" -f -a "detach" -d 'Remove what attach made (refused while the cluster has live sessions): custom resources first, then the operator, its RBAC and namespaces, the CRDs last'
