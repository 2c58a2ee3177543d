"""The example operator (`fastctl.demo.widgets`) and the `fastctl demo` command behind it.

It ships in the package so that ``fastctl demo`` works from any install; ``examples/``
shows how to run it yourself.
"""
