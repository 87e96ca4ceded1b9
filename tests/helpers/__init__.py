"""Helpers the tests share: fakes, servers and model writers that more than one test module uses.

Test modules import from here (and tests/fakes), never from each other or from a conftest.py, whose fixtures
pytest finds without an import (tests/unit/test_test_layout.py checks).
"""
