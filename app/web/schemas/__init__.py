"""Request and response bodies of the JSON API, a module per router: the names are a contract other tools rely on."""
