from starpo_hotpotqa import main

if __name__ == "__main__":
    main()
