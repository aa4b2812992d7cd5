import sys

from loadtests.pdload.entry import main

sys.exit(main())
