"""Running ``gpu_throughput.py`` on a GPU machine without registry access (README.md here)."""
