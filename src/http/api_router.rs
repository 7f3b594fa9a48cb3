//! Routes built two ways from the same handlers: for serving, or with their OpenAPI operations.
//!
//! Every route module says `routes!(D: handler, …)` with `D: Docs` a type parameter of its
//! `routes` function. [`Serve`] (the server's router) reads only each handler's path and methods
//! from its `#[utoipa::path]`; [`Document`] (`http::api_document`, used by the tests that hold the
//! committed `web/src/api/openapi.json` equal to the handlers) builds the whole operation too, as
//! utoipa-axum's `routes!` does. The server serves that committed document, so the code that
//! builds operations and schemas — 2.6 MiB of the dist binary, never run by a serving process — is not
//! in the binary at all (issue "Edge footprint").

pub use utoipa_axum::router::OpenApiRouter;

/// How a router is built; `FULL` is known at compile time, so the branch not taken is not
/// compiled into the binary.
pub trait Docs: 'static {
    const FULL: bool;
}

/// Routes only: what the server runs.
pub enum Serve {}
impl Docs for Serve {
    const FULL: bool = false;
}

/// Routes with their OpenAPI operations and schemas.
pub enum Document {}
impl Docs for Document {
    const FULL: bool = true;
}

/// `routes!(D: a, b)`: the handlers of one path, for [`OpenApiRouter::routes`]. With
/// `D = Document` it is utoipa-axum's `routes!`; with `D = Serve` the same routes with an empty
/// path item (each handler's `path()` and `methods()` only).
macro_rules! routes {
    ($docs:ty: $first:ident $(, $handler:ident)* $(,)?) => {
        if <$docs as $crate::http::api_router::Docs>::FULL {
            ::utoipa_axum::routes!($first $(, $handler)*)
        } else {
            use ::utoipa_axum::PathItemExt as _;
            let mut router = ::axum::routing::MethodRouter::new();
            $(
                ::utoipa_axum::paste! {
                    for method in <[<__path_ $handler>] as ::utoipa::Path>::methods() {
                        router = router.on(method.to_method_filter(), $handler);
                    }
                }
            )*
            ::utoipa_axum::paste! {
                for method in <[<__path_ $first>] as ::utoipa::Path>::methods() {
                    router = router.on(method.to_method_filter(), $first);
                }
                let path = <[<__path_ $first>] as ::utoipa::Path>::path();
            }
            let mut paths = ::utoipa::openapi::path::Paths::new();
            paths.paths.insert(path, ::utoipa::openapi::path::PathItem::default());
            (Vec::new(), paths, router)
        }
    };
}
pub(crate) use routes;
