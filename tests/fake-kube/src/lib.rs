//! A fake Kubernetes API server for tests and trials. Never compiled into the shipped binary.
