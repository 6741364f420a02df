from starpo_minigrid import main

if __name__ == "__main__":
    main()
