"""DCQCN + PFC fluid model: parameters, kernel, simulation, results, PFC analysis."""
