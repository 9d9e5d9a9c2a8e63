from gspo.cli import main

main()
