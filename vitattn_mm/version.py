__version__ = '0.5.12'
