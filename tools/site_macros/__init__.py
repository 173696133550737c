"""Macros available in every page (mkdocs-macros ``module_name``).

Each building block registers its macros from its own module, so each concept has one home:

- ``snippets``: code blocks from ``snippets/`` and the outputs recorded by running them.
- ``benchmark``: numbers in prose, computed from the benchmark's recorded results.
- ``recorded``: numbers in prose from the variant, decoding, varlen and host-time recordings.
- ``layout``: images, image grids, the compare slider, video, the list of posts, style-guide examples.
- ``interactive``: runnable cells (code that readers edit and run in the browser).
"""

from tools.site_macros import benchmark, interactive, layout, recorded, snippets


def define_env(env):
    snippets.register(env)
    benchmark.register(env)
    recorded.register(env)
    layout.register(env)
    interactive.register(env)
