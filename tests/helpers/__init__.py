"""Helpers the tests share: fakes, servers and model writers that more than one test module uses.

Test modules import from here (or from tests/conftest.py's fixtures), never from each other.
"""
