"""The one reader of a scenario's config (scenario.build) and the tables it reads against: the
policy knobs, the hardware and model catalogs, the quality and cascade models, the settings
schema, overrides and the metrics' specification."""
