"""aijobs: the shared library of the aijobs Lambda functions, shipped as a Lambda layer.

Modules at the package root (domain, errors, cron, observability, ...) are imported by everything
else and import nothing from the layers above them (docs/layout.md, "Layers"). Build-time code
(the stage config's parser, the provider plan's derivation) is in aijobs_cdk, not here.
"""

# The release (CHANGELOG.md): a fork compares it with upstream's to see what it has not taken yet.
__version__ = "0.3.0"
