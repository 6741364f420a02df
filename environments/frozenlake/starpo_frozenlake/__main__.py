from starpo_frozenlake import main

if __name__ == "__main__":
    main()
