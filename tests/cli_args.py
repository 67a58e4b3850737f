"""Command lines shared by the CLI tests (a small, fast training-step case)."""

# Llama-3-8B on 64 H100 of dgx-h100-superpod, TP 8: runs in about a second.
STEP = [
    "step",
    "--fabric",
    "dgx-h100-superpod",
    "--gpu",
    "h100-sxm",
    "--model",
    "llama3-8b",
    "--gpus",
    "64",
    "--tp",
    "8",
    "--micro-batch",
    "1",
    "--global-batch",
    "64",
    "--seq",
    "4096",
]
