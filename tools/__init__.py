"""Build tooling for the flashdoc site (not part of the installed package)."""
