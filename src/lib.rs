//! gShare Edge: the gShare GPU-sharing control plane as one binary.
