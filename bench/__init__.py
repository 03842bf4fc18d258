"""zmqdata's benchmarks: run ``make bench`` or ``python bench/run.py --quick``.

Never collected by the test suite (pytest's ``testpaths`` is ``tests``, and
``bench/conftest.py`` ignores this folder should someone point pytest at it).
"""
