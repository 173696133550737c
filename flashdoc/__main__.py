"""``python -m flashdoc``: print the environment report (versions, GPU, kernel path, switches)."""

from flashdoc._config import show_config

show_config()
