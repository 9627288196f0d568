# A stand-in for cuda-python: see bindings/driver.py.
