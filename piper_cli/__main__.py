from piper_cli.entry import main

main()
