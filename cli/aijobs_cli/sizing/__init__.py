"""Sizing a deployment: `aijobs cost` (what a workload costs a month) and `aijobs capacity` (which
limit a job rate meets first), from the measured call profile and partition trace shipped beside them.

Pure arithmetic: nothing here calls AWS.
"""
