"""Plain nn.Modules and samplers; nothing here registers anything."""
