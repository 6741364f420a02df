from starpo_bandit import main

if __name__ == "__main__":
    main()
