"""newsmon shared core: encoder, knowledge memory, predictors, metrics, CLI."""
