from appliance_cli.cli.main import main

raise SystemExit(main())
