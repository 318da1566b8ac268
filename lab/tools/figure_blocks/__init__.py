"""The block functions of lab/tools/docs_figures.py, one module per kind of figure, with what they share in core.py.

Importing a module registers its blocks in `core.BLOCKS`; the entry script imports every one of them.
"""
