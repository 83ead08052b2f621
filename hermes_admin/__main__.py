from hermes_admin.cli.main import main

main()
