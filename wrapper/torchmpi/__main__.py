import sys

from torchmpi.cli import main

sys.exit(main())
