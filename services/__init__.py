"""lakeward.services: the table-services daemon and the command line."""
