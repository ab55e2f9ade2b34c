import sys

from dra_fake.cli import main

sys.exit(main())
