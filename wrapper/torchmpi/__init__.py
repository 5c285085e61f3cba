"""torchmpi: site recipes and checks for PyTorch's MPI and NCCL backends on HPC networks."""

__version__ = "0.1.0"
