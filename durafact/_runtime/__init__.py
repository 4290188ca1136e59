"""durafact's runtime."""
