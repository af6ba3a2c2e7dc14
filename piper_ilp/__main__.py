from piper_ilp.cli import main

main()
