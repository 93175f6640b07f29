"""Skills as data (``skill``): the declarative format, validation, versions and run rules.
May import every kernel package but ``loops``."""
