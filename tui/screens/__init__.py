"""The workbench's screens: session browser, workbench, and the modal dialogs."""
