"""Flow-level solvers: max-min fair rates, flow completion, DCQCN/PFC dynamics.

Subpackages import nothing heavy at package import; import the module you need.
"""
