"""aijobs: the shared library of the aijobs Lambda functions, shipped as a Lambda layer.

Modules at the package root (settings, stage_config, cron, observability) are imported by
everything else and import nothing from the layers above them.
"""

# The release (CHANGELOG.md): a fork compares it with upstream's to see what it has not taken yet.
__version__ = "0.3.0"
