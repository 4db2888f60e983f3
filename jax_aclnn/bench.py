"""placeholder"""
def add_arguments(p): pass
def run(a): pass
