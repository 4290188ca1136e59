"""_local: private."""
