"""Examples for the README tour: an example job (example_job) and a worker running it
(example_worker). See the module docstrings for the commands."""
