# A stand-in for cuda-python: see driver.py.
