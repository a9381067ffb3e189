from flux.cli import main

raise SystemExit(main())
