"""One construct per capability. (This package is `aijobs_cdk.constructs`, not the `constructs` library.)"""
