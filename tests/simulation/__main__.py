import sys

from tests.simulation.run import main

sys.exit(main())
