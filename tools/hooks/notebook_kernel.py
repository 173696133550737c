"""mkdocs hook: the kernel that executes notebook pages talks to the build over local sockets (IPC), not TCP.

Over TCP, ipykernel warns on every build that its traffic is unencrypted; that line said nothing about the site
and buried real warnings. ``tools/jupyter/jupyter_nbconvert_config.json`` sets the kernel manager's transport;
it is added to the configuration path that nbconvert (which mkdocs-jupyter runs) reads, after any of your own.
"""

import os
from pathlib import Path

CONFIG = Path(__file__).resolve().parents[1] / "jupyter"


def on_config(config, **kwargs):
    paths = [p for p in os.environ.get("JUPYTER_CONFIG_PATH", "").split(os.pathsep) if p]
    if str(CONFIG) not in paths:
        os.environ["JUPYTER_CONFIG_PATH"] = os.pathsep.join(paths + [str(CONFIG)])
    return config
