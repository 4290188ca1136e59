"""_core: private."""
