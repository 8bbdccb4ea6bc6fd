"""A Hugging Face ``config.json`` read as a network spec (pure): the config parsed (:mod:`.config`),
its family's reader (:mod:`.families`) filling one decoder (:mod:`.decoder`), and the spec written
(:mod:`.spec`); :func:`.importer.import_config` is the entry."""
