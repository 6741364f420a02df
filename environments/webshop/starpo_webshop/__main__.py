from starpo_webshop import main

if __name__ == "__main__":
    main()
