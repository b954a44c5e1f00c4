"""The rules, one small class each, grouped in modules by family (ACC1xx order.py, ACC2xx scaling.py,
...). Each class registers itself when its module is imported; registry.py imports every module of
this package, so a new module or class needs no entry anywhere else.
"""
