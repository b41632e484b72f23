"""keymem's services, each runnable as a supervised process or as a thread (services.stack)."""
