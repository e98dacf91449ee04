"""The demo: a real instrumented PyTorch job and a simulated 256-host job on the embedded stack."""
