"""The lab's commands, one module each with `add_parser(commands)`, as `hf_jacobi.cli`'s commands are built."""
