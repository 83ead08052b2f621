from hermes_admin.cli.entry import main

main()
