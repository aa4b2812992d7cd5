from loadtests.pdload.cli import main

main()
