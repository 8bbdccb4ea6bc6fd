"""The machine model: devices, nodes and links, loaded from the shipped YAMLs beside this file or a user's."""
