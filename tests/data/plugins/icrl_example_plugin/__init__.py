"""An example plugin (docs/development.md, "Plugins"): a context strategy with one parameter, a
reward and a figure, registered through icrl.plugin when this package is imported."""

from . import figure, reward, strategy  # noqa: F401  each module registers its part
