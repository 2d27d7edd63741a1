"""What several test modules share (builders, fixtures, checks), one module per concern; a test
module imports from here, never from another test module. ``tests/`` is on ``sys.path`` (pytest puts
the directory of ``tests/conftest.py`` there, for ``tests/gpu`` too), so every test module imports
``helpers.<module>``."""
